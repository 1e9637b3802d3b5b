package cli

import (
	"fmt"

	"github.com/cove-dev/cove/api"

	"github.com/spf13/cobra"
)

func (a *app) teamsCmd() *cobra.Command {
	teams := &cobra.Command{Use: "teams", Short: "Manage teams and their keys (admin key)"}
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a team and print its first API key",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			resp, err := cl.CreateTeam(cmd.Context(), args[0])
			if err != nil {
				return teamNameTaken(cmd.Context(), cl, args[0], err)
			}
			if a.json {
				return a.printJSON(resp)
			}
			fmt.Fprintf(a.env.Stdout, "team %s (%s)\napi key (shown once): %s\n", resp.Team.Name, resp.Team.ID, resp.APIKey)
			return nil
		},
	}
	a.jsonFlag(create)
	var e2bShape bool
	key := &cobra.Command{
		Use:   "key TEAM_ID",
		Short: "Make a new API key for a team",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			req := api.CreateKeyRequest{}
			if e2bShape {
				req.Format = api.KeyFormatE2B
			}
			resp, err := cl.CreateKey(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(resp)
			}
			fmt.Fprintf(a.env.Stdout, "api key (shown once): %s\n", resp.APIKey)
			return nil
		},
	}
	a.jsonFlag(key)
	key.Flags().BoolVar(&e2bShape, "e2b", false, "shape the key e2b_<hex>, as E2B's SDKs expect (it is a cove key like any other)")
	teams.AddCommand(create, key, a.teamsLimitCmd(), a.admitCmd(), a.teamMeCmd())
	return teams
}
